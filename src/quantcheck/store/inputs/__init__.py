"""What a user writes for quantcheck to read: prompt sets, data files, suites, rubrics, YAML."""
