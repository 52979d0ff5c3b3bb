"""The ext-eval engine: a test set and an extension in, a verdict and a report out."""
