"""The verdict: policy + reviews + report -> pass or fail, its CI files, and the
candidates' overview and recommendation. Imports judge, store and errors; offline."""
