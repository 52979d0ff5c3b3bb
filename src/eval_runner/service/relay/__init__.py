"""The relay: the connection, its liveness, publishing, systemd's notify socket."""
