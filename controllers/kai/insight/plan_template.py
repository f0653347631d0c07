"""``kai plan --template FILE``: a plan rendered by a team's own Jinja template.

The template comes from the repository under review, so it is untrusted:

- it runs in Jinja's ``ImmutableSandboxedEnvironment`` and sees only plain data (dicts, lists,
  strings, numbers, booleans: :func:`template_data`), so no attribute leads out of the plan and
  nothing can be changed; ``{% include %}``, ``{% import %}`` and ``{% extends %}`` find no other
  template;
- an undefined name is an error (``StrictUndefined``), reported with the template's file and
  line, as a syntax error is;
- the output is bounded (:data:`MAX_OUTPUT` characters: a pull-request comment holds at most
  65536), and so are the time and memory of the rendering: it runs in a child process with a
  CPU-time and address-space limit and a wall-clock timeout, so a template that loops or
  allocates without end is stopped with a clear error;
- the rendering process inherits no environment variable but those Python needs to start
  (a CI token in the environment is not there);
- every ``{{ … }}`` prints a value as a YAML user reads it (``true``, ``{a: 1}``, nothing for a
  null), never as a Python literal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from typing import TYPE_CHECKING, Any

from kai.insight.values import show

if TYPE_CHECKING:  # the rendering process imports only this module and kai.insight.values
    from kai.insight.plan import Plan

MAX_OUTPUT = 65536  # characters: the most a GitHub pull-request comment holds
MAX_TEMPLATE = 256 * 1024  # bytes of template source
TIME_LIMIT = 10  # seconds of CPU (and twice that of wall clock) for the rendering
MEMORY_LIMIT = 1024 * 1024 * 1024  # bytes of address space of the rendering process


class TemplateError(Exception):
    """The template cannot be read or rendered; the message names the file (and line)."""


def template_data(plan: Plan) -> dict[str, Any]:
    """The plan as the template sees it: the document of ``kai plan -o json``, each change with
    ``beforeText``/``afterText`` (the value as YAML, ``(unset)`` for no field)."""
    doc = plan.as_dict()
    for queue in doc["queues"]:
        for change in queue["changes"]:
            change["beforeText"] = show(change["before"])
            change["afterText"] = show(change["after"])
    # a round trip through JSON: only plain data reaches the template
    data: dict[str, Any] = json.loads(json.dumps(doc))
    return data


def render(path: str, plan: Plan) -> str:
    """The text of template ``path`` for ``plan`` (TemplateError when it cannot be made)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TEMPLATE + 1)
    except OSError as exc:
        raise TemplateError(f"--template {path}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_TEMPLATE:
        raise TemplateError(f"--template {path}: larger than {MAX_TEMPLATE} bytes")
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TemplateError(f"--template {path}: not UTF-8 text ({exc.reason})") from exc
    limits = {"cpu": TIME_LIMIT, "memory": MEMORY_LIMIT, "output": MAX_OUTPUT}
    request = json.dumps(
        {"path": path, "source": source, "plan": template_data(plan), "limits": limits}
    )
    try:
        child = subprocess.run(
            [sys.executable, "-m", "kai.insight.plan_template"],
            input=request.encode(),
            capture_output=True,
            env=_child_env(),
            timeout=2 * TIME_LIMIT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise TemplateError(
            f"{path}: the template ran longer than {2 * TIME_LIMIT} s and was stopped"
        ) from exc
    if child.returncode == 0:
        text = child.stdout.decode("utf-8")
        if len(text) > MAX_OUTPUT:  # the child checks it too
            raise TemplateError(_too_large(path, MAX_OUTPUT))
        return text
    message = child.stderr.decode("utf-8", errors="replace").strip()
    if child.returncode < 0 or not message:
        message = (
            f"{path}: the template was stopped (more than {limits['cpu']} s of CPU or "
            f"{limits['memory'] // 2**20} MiB of memory)"
        )
    raise TemplateError(message.splitlines()[-1])


# what Python needs to start and find kai; nothing else of the environment (CI tokens) is passed
CHILD_ENV = ("PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LANG", "LC_ALL", "SYSTEMROOT")


def _child_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in CHILD_ENV if k in os.environ}
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def _limits(cpu: int, memory: int) -> None:
    """Bound this (the rendering) process before it compiles the template."""
    if os.name != "posix":
        return
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def _too_large(path: str, limit: int) -> str:
    return (
        f"{path}: the rendered template is larger than {limit} characters (the limit of "
        "kai plan --template, the size of a pull-request comment)"
    )


def _finalize(value: Any) -> Any:
    """What ``{{ value }}`` prints: YAML for people, never a Python literal."""
    if value is None:
        return ""
    if isinstance(value, bool | int | float | dict | list):
        return show(value)
    return value


def _line(exc: BaseException, path: str) -> int | None:
    """The template line being rendered when ``exc`` was raised (Jinja rewrites the traceback
    so that its frames name the template file and line)."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == path:
            line = frame.lineno
    return line


def _render_here(path: str, source: str, data: dict[str, Any], max_output: int) -> str:
    """The rendering itself (in the child process)."""
    from jinja2 import BaseLoader, StrictUndefined, TemplateNotFound, TemplateSyntaxError
    from jinja2.exceptions import TemplateError as JinjaError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class OnlyThis(BaseLoader):
        def get_source(self, environment: Any, template: str) -> tuple[str, str, Any]:
            if template != path:
                raise TemplateNotFound(template)
            return source, path, lambda: True

    env = ImmutableSandboxedEnvironment(
        loader=OnlyThis(),
        undefined=StrictUndefined,
        finalize=_finalize,
        autoescape=False,
        keep_trailing_newline=True,
    )
    try:
        template = env.get_template(path)
    except TemplateSyntaxError as exc:
        raise TemplateError(f"{path}:{exc.lineno}: template syntax error: {exc.message}") from exc
    out: list[str] = []
    size = 0
    try:
        for piece in template.generate(plan=data):
            size += len(piece)
            if size > max_output:
                raise TemplateError(_too_large(path, max_output))
            out.append(piece)
    except TemplateError:
        raise
    except TemplateNotFound as exc:
        where = _line(exc, path)
        raise TemplateError(
            f"{path}:{where or '?'}: template {exc.name} not found: a plan template is one "
            "file and includes no other"
        ) from exc
    except JinjaError as exc:  # undefined names, the sandbox's refusals
        where = _line(exc, path)
        kind = type(exc).__name__
        raise TemplateError(f"{path}:{where or '?'}: {kind}: {exc.message or exc}") from exc
    except MemoryError as exc:
        raise TemplateError(
            f"{path}: the template needs more than {MEMORY_LIMIT // 2**20} MiB of memory"
        ) from exc
    except RecursionError as exc:
        raise TemplateError(f"{path}: the template recurses too deeply") from exc
    except Exception as exc:  # a filter's error on the template's own values
        where = _line(exc, path)
        raise TemplateError(f"{path}:{where or '?'}: {type(exc).__name__}: {exc}") from exc
    return "".join(out)


def _main() -> int:
    request = json.loads(sys.stdin.buffer.read())
    limits = request["limits"]
    _limits(limits["cpu"], limits["memory"])
    try:
        text = _render_here(request["path"], request["source"], request["plan"], limits["output"])
    except TemplateError as exc:
        print(exc, file=sys.stderr)
        return 2
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
