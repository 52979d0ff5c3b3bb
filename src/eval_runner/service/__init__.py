"""The hosted service: relay connection and liveness, request pipeline, ledger, admission, quota, usage."""
