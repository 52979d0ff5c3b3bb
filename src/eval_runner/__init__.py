"""eval-runner: the hosted eval runner — does this agent extension actually help?"""

__version__ = "0.1.0"
