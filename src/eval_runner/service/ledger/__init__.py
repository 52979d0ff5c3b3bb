"""The ledger: every claim and job, durable before anything is said."""
