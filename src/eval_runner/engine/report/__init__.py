"""The report and the results directory: built, measured, written and shown."""
