"""run_command: one command line, run without a shell, in a confined working directory.

No shell means no pipes, redirections, globbing or ``$(...)``: the string is split with
:func:`shlex.split` and the first word is executed directly. What a person approves is
therefore exactly what runs, and the fingerprint (the exact string plus the cwd) cannot
be satisfied by a different command that happens to share a prefix.

A command is DESTRUCTIVE unless its exact string is listed in
``policy.read_only_commands``; then it is READ and may run unattended. Never a command
that runs what the work dir tells it to (`runs_work_dir_code`): the agent writes the work
dir unattended (``write_file`` is DRAFT), so ``git status`` would run the ``core.fsmonitor``
command of a ``.git/config`` it wrote, as the daemon's user, outside every file check.

Nor a command whose program lies in the work dir (`program_in_work_dir`), however it is
found: by an absolute path, or along ``PATH`` (a project's ``.venv/bin`` or
``node_modules/.bin`` on the daemon's ``PATH``). ``write_file`` keeps an existing file's
mode, so the agent can replace such a program's text with its own and keep it executable.

The child gets only the variables of the daemon's environment named in
``tools.run_command.env`` (`ToolContext.command_env`): the daemon's own secrets (API keys,
tokens, database passwords passed as variables) never reach a command.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from pathlib import Path
from typing import Any

from signoff.errors import BadArguments, ToolError
from signoff.runtime.models import RiskClass
from signoff.runtime.text import shorten
from signoff.runtime.tools.base import (
    Param,
    Preview,
    ToolContext,
    bounded,
    decode_prefix,
    tail,
)
from signoff.runtime.tools.builtin.fs import normalize_path, reach

CHUNK = 65_536

# Programs that take commands to run from the directory they run in (git: core.fsmonitor,
# aliases, filters; build tools and test runners: their build or test files; interpreters
# and shells: the script, sitecustomize, a module of that name), or that run another
# command of their own arguments. Not a complete list of the dangerous (it cannot be): a
# list of the well-known ones, so that a harmless-looking example is never taken for one.
RUNS_WORK_DIR_CODE = frozenset({
    "git", "make", "gmake", "cmake", "ninja", "meson", "just", "task", "rake", "ant",
    "mvn", "gradle", "gradlew", "sbt", "npm", "npx", "pnpm", "yarn", "bun", "deno", "node",
    "python", "python3", "pip", "pip3", "pytest", "py.test", "tox", "nox", "uv", "poetry",
    "pipenv", "hatch", "pdm", "cargo", "go", "dotnet", "bundle", "ruby", "perl", "php",
    "composer", "sh", "bash", "zsh", "dash", "fish", "ksh", "env", "sudo", "doas", "xargs",
    "nice", "nohup", "timeout", "watch", "docker", "docker-compose", "podman", "terraform",
    "tofu", "direnv", "nix", "nix-shell",
    # Checkers and test runners that load plugins or code named by a config file in the
    # directory they run in (mypy's plugins, pylint's init-hook, eslint.config.js, …).
    "mypy", "dmypy", "pylint", "flake8", "pre-commit", "eslint", "prettier", "stylelint",
    "jest", "vitest", "mocha", "rubocop", "rspec", "phpunit", "phpstan", "psalm",
    "golangci-lint", "bazel", "bazelisk", "scons", "invoke", "zig", "mix", "stack",
    "cabal", "lein", "clojure", "clj",
    # More interpreters and shells, and wrappers that run their arguments.
    "ipython", "jupyter", "lua", "luajit", "Rscript", "R", "julia",
    "pwsh", "csh", "tcsh", "busybox", "tclsh", "expect", "elixir", "erl", "ghc", "runghc",
    "stdbuf", "setsid", "chroot", "flock", "ionice", "strace", "ltrace", "gdb",
    "valgrind", "time", "parallel", "entr", "vim", "nvim", "vi", "emacs",
})


def runs_work_dir_code(command: str) -> str | None:
    """Why ``command`` may not run unattended as READ whatever a config says (None: it
    may). The program is judged by its name, with any version suffix (python3.11)."""
    try:
        program = split_command(command)[0]
    except BadArguments:
        return None  # refused as unparsable (or empty) when it is used
    if "/" in program and not program.startswith("/"):
        return (f"{program!r} is a file in the work dir, which the agent can rewrite "
                f"unattended")
    name = program.rsplit("/", 1)[-1]
    base = name.rstrip("0123456789.")
    if name in RUNS_WORK_DIR_CODE or base in RUNS_WORK_DIR_CODE:
        return (f"{name!r} runs what the work dir tells it to (configuration, build or "
                f"test files, scripts), which the agent can write unattended: as READ it "
                f"would run code of the agent's choosing that nobody saw")
    return None


def program_in_work_dir(program: str, work_dir: Path, cwd: Path) -> Path | None:
    """The file ``program`` runs from when it lies in ``work_dir`` (None: elsewhere, or
    not found). Found as `asyncio.create_subprocess_exec` finds it: a name with a slash
    from the child's ``cwd``, else the first executable file along ``PATH`` (relative
    entries from ``cwd``). Both the daemon's ``PATH`` and the system's default are looked
    along, whichever the child gets (``tools.run_command.env``)."""
    root = os.path.realpath(work_dir)
    if "/" in program:
        candidates = [os.path.join(cwd, program)]
    else:
        dirs = [*os.environ.get("PATH", "").split(os.pathsep), *os.defpath.split(os.pathsep)]
        candidates = [os.path.join(cwd, d, program) for d in dirs]  # "": the cwd
    for candidate in candidates:
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        real = os.path.realpath(candidate)
        if real == root or real.startswith(root.rstrip("/") + "/"):
            return Path(real)
    return None


def split_command(command: str) -> list[str]:
    """The argv of ``command``; BadArguments when it is empty or its quoting is broken."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise BadArguments(f"run_command: cannot parse {command!r}: {exc}") from exc
    if not argv:
        raise BadArguments("run_command: command is empty")
    return argv


async def _read_capped(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, bool]:
    """Keep the first ``limit`` bytes and drain the rest, so the child never blocks on a
    full pipe and a chatty command cannot fill our memory."""
    if stream is None:
        return b"", False
    kept = bytearray()
    truncated = False
    while chunk := await stream.read(CHUNK):
        room = limit - len(kept)
        if len(chunk) > room:
            truncated = True
        kept += chunk[: max(room, 0)]
    return bytes(kept), truncated


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """Kill the command and anything it started (it leads its own process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def command_env(names: tuple[str, ...]) -> dict[str, str]:
    """The child's environment: only ``names``, from the daemon's, where set."""
    return {name: os.environ[name] for name in names if name in os.environ}


class RunCommandTool:
    """Run a program with arguments in the work dir."""

    name = "run_command"
    content: tuple[str, ...] = ()
    capability = "exec.shell"
    description = (
        "Run one command line without a shell (no pipes or redirections) in the work dir "
        "or a directory inside it; returns exit code, stdout and stderr."
    )
    params: tuple[Param, ...] = (
        Param("command", str, description="The command line, e.g. 'git status --short'."),
        Param("cwd", str, required=False, description="Directory inside the work dir."),
    )

    def __init__(
        self, *, read_only_commands: frozenset[str] = frozenset(), work_dir: Path | None = None
    ) -> None:
        self.read_only_commands = frozenset(read_only_commands)
        self._work_dir = work_dir  # only to spell an absolute cwd relative in fingerprints

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        # Exact match on purpose: "git status" being safe says nothing about "git status; x"
        # or "git  status" with different spacing that a parser might treat differently.
        command = args["command"]
        if command in self.read_only_commands and not runs_work_dir_code(command) \
                and not self._program_in_work_dir(command, args):
            return RiskClass.READ
        return RiskClass.DESTRUCTIVE

    def _program_in_work_dir(self, command: str, args: dict[str, Any]) -> bool:
        """True when the listed command's program is a file in the work dir (see the module
        docstring): the agent may have rewritten it, so it asks as any other command."""
        if self._work_dir is None:  # a registry without a work dir (tests, listings)
            return False
        root = self._work_dir.resolve()
        cwd = root / self._cwd(args)
        return program_in_work_dir(split_command(command)[0], root, cwd) is not None

    def _cwd(self, args: dict[str, Any]) -> str:
        return normalize_path(self._work_dir, args.get("cwd") or ".")

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        split_command(args["command"])  # refuse unparsable commands before anyone approves
        return {"command": args["command"], "cwd": self._cwd(args)}

    def summary(self, args: dict[str, Any]) -> str:
        where = f" in {args['cwd']}" if args.get("cwd") else ""
        return f"Run command `{shorten(args['command'], 80)}`{where}"

    def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview:
        """The whole command line as it will run (the title shortens it) and its cwd."""
        cwd = normalize_path(ctx.work_dir, args.get("cwd") or ".")
        where = "the work dir" if cwd == "." else cwd
        text, cut = bounded(f"$ {args['command']}\n(in {where})")
        return Preview(label="Command", text=text, kind="command", cut=cut)

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        cwd = self._cwd(args)
        return (args["command"],) if cwd == "." else (args["command"], f"cwd: {cwd}")

    async def check(self, args: dict[str, Any], ctx: ToolContext) -> None:
        """Refuse an unparsable command or a cwd outside the work dir before anyone is asked."""
        split_command(args["command"])
        await asyncio.to_thread(reach, ctx, args.get("cwd") or ".")

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        argv = split_command(args["command"])
        cwd = await asyncio.to_thread(reach, ctx, args.get("cwd") or ".")
        if not cwd.is_dir():
            raise ToolError(f"run_command: cwd {args.get('cwd')!r} is not a directory")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env=command_env(ctx.command_env),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # own process group, so a timeout kills its children
            )
        except FileNotFoundError as exc:
            raise ToolError(f"run_command: command not found: {argv[0]!r}") from exc
        except PermissionError as exc:
            raise ToolError(f"run_command: {argv[0]!r} is not executable") from exc
        except OSError as exc:
            raise ToolError(f"run_command: cannot start {argv[0]!r}: {exc}") from exc
        out, err = await self._collect(proc, argv[0], ctx)
        stdout = decode_prefix(out[0], truncated=out[1])
        stderr = decode_prefix(err[0], truncated=err[1])
        code = proc.returncode if proc.returncode is not None else -1
        if code != 0:
            detail = tail(stderr) or tail(stdout)
            raise ToolError(
                f"run_command: {argv[0]!r} exited with code {code}"
                + (f": {detail}" if detail else "")
            )
        return {
            "exit_code": code,
            "stdout": stdout,
            "stderr": stderr,
            "truncated": out[1] or err[1],
        }

    async def _collect(
        self, proc: asyncio.subprocess.Process, program: str, ctx: ToolContext
    ) -> tuple[tuple[bytes, bool], tuple[bytes, bool]]:
        """Wait for the process and its output, killing it past the timeout."""
        work = asyncio.gather(
            _read_capped(proc.stdout, ctx.output_limit),
            _read_capped(proc.stderr, ctx.output_limit),
            proc.wait(),
        )
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for returns the output and drops
            # a cancel that lands as the command ends, and the worker then never stops.
            async with asyncio.timeout(ctx.command_timeout):
                out, err, _ = await work
        except TimeoutError:
            _kill_group(proc)
            await proc.wait()
            raise ToolError(
                f"run_command: {program!r} timed out after {ctx.command_timeout:g}s"
            ) from None
        except BaseException:
            # Cancelled (daemon shutdown, Ctrl-C): never leave the command running behind
            # us. The readers' gather ends cancelled too; taking its exception keeps asyncio
            # from printing "exception was never retrieved" with a traceback.
            work.add_done_callback(lambda done: done.cancelled() or done.exception())
            _kill_group(proc)
            await proc.wait()
            raise
        return out, err
