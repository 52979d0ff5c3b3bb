"""Grading a run: grader specs, the graders, their patterns, the doors door graders ask."""
