"""A request's way through the service: opened, admitted, run, answered and sealed."""
