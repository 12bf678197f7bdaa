"""What the checks of deploy_check.py share: the problems found so far
and the parsing of a command line."""

problems = []

# Defaults of kvmesh's flags that the checks compare files against: every
# process's --block-tokens (rule 4: one block size) and the gateway's
# --listen.
DEFAULT_BLOCK_TOKENS = "512"
GATEWAY_LISTEN = "0.0.0.0:8080"


def bad(msg):
    problems.append(msg)


def finish(what):
    for p in problems:
        print(f"{what}: {p}")
    return 1 if problems else 0


def flag(cmd, name):
    """The value after `name` in a command list, or None."""
    for i, a in enumerate(cmd[:-1]):
        if a == name:
            return cmd[i + 1]
    return None
