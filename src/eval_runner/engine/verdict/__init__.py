"""From graded runs to a verdict: scores, the gate, notes and the statistics beside it."""
