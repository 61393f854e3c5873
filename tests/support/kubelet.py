"""What the kubelet does to a container's command, args and env values
before the program sees them, for the tests that run a child as the hook
answered it (tests/scripts) and the process node (tests/e2e/procnode.py).

Standard library only.
"""


def expand(text, env):
    """The kubelet's expansion: $(NAME) of a defined NAME is its value, $$ is $,
    anything else stays as written."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and text.find(")", i) > 0:
            j = text.find(")", i)
            name = text[i + 2 : j]
            out.append(env[name] if name in env else text[i : j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
