"""One run: the sandbox, its bridge and door proxy, the budgets it is held to, what it leaves."""
