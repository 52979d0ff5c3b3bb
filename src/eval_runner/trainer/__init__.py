"""The trainer's side: the client, the requests it keeps, the sealed reports it opens."""
