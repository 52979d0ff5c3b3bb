"""Stand-ins for what is outside our control: an agent, a model door, and `gcloud` for a bucket. Never the
real thing.

Tests and the demo use them in place of the agent (`coder`) and its model door; whatever they produce
says so where a person reads it."""

from pathlib import Path

#: The stand-in agent, a stdlib-only script run in the sandbox as an agent would be.
AGENT = Path(__file__).with_name("agent.py")
#: The stand-in `gcloud storage cp`, writing a local directory a Blossom server reads back.
GCLOUD = Path(__file__).with_name("gcloud.py")
