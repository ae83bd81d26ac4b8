"""The verdict: policy + reviews + report -> pass or fail, its CI files, and the
candidates' overview and recommendation; offline. What it may import: the layer map in
docs/development.md."""
