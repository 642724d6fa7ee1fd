"""The command line itself: targets, usage errors and what building the parser imports (impl/cli).

What it proves: a ``module:callable`` target that cannot be loaded (malformed, no such module or parent
package, a module whose import raises or lacks a dependency, no such attribute, not callable) is exit 2
with one line on standard error that quotes the target as written and says what went wrong, for
``verify`` and for ``serve --ledger`` alike; a good target loads from the current directory; usage
mistakes are exit 2; and ``capture-ledger spec --help``, building the parser and a short ``verify`` run
import none of the HTTP stack (checked in a fresh interpreter).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from capture_ledger.impl.cli.main import CLOSED_OUTPUT_EXIT, main
from capture_ledger.reference.mutants import open_reference
from capture_ledger.spec.kit import OptionError, TargetError, bind_options, load_target, parse_options

HTTP_STACK = ("fastapi", "starlette", "uvicorn", "httpx")


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on ``sys.path`` holding small target modules (names unique to this test file)."""
    (tmp_path / "cli_targets_ok.py").write_text(
        "from capture_ledger.reference.mutants import open_reference\n"
        "class Openers:\n"
        "    reference = staticmethod(open_reference)\n"
        "NOT_CALLABLE = 42\n"
    )
    (tmp_path / "cli_targets_raises.py").write_text("raise RuntimeError('the import blew up')\n")
    (tmp_path / "cli_targets_needs.py").write_text("import cli_targets_absent_dependency\n")
    (tmp_path / "cli_targets_syntax.py").write_text("def broken(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("no-colon-here", "a target is module:callable"),
        ("cli_targets_ok:", "a target is module:callable"),
        (":open", "a target is module:callable"),
        ("cli_targets_nowhere:open", "no module named 'cli_targets_nowhere'"),
        ("cli_targets_nowhere.sub:open", "no module named 'cli_targets_nowhere'"),
        ("cli_targets_raises:open", "importing cli_targets_raises raised RuntimeError: the import blew up"),
        (
            "cli_targets_needs:open",
            "importing cli_targets_needs raised ModuleNotFoundError: "
            "No module named 'cli_targets_absent_dependency'",
        ),
        ("cli_targets_syntax:open", "importing cli_targets_syntax raised SyntaxError"),
        ("cli_targets_ok:missing", "cli_targets_ok has no attribute 'missing'"),
        ("cli_targets_ok:Openers.missing", "cli_targets_ok.Openers has no attribute 'missing'"),
        ("cli_targets_ok:NOT_CALLABLE", "cli_targets_ok.NOT_CALLABLE is a int, not a callable"),
    ],
)
def test_a_target_that_cannot_be_loaded_is_exit_2_naming_it(
    modules: Path, target: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(TargetError) as raised:
        load_target(target)
    assert raised.value.target == target
    assert main(["verify", target]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"capture-ledger verify: cannot load target {target!r}: ")
    assert problem in err and err.count("\n") == 1, err


def test_a_good_target_loads_including_a_dotted_attribute(modules: Path) -> None:
    assert load_target("cli_targets_ok:open_reference") is open_reference
    assert load_target("cli_targets_ok:Openers.reference") is open_reference


def test_serve_reports_a_bad_ledger_target_before_binding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "token"
    token.write_text("cli-token")
    args = ["serve", "--dir", str(tmp_path / "lineage"), "--port", "0", "--token-file", str(token)]
    assert main([*args, "--ledger", "cli_targets_nowhere:open"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no URL announced: nothing was bound
    assert "capture-ledger serve: cannot load target 'cli_targets_nowhere:open'" in err
    assert not (tmp_path / "lineage").exists()


def test_serve_reports_a_ledger_that_cannot_be_opened(tmp_path: Path) -> None:
    """A factory that raises: exit 2 with its error, nothing announced (in a child: serve sets os.environ)."""
    (tmp_path / "cli_targets_refuses.py").write_text(
        "def open_ledger(directory):\n    raise PermissionError(f'no access to {directory}')\n"
    )
    token = tmp_path / "token"
    token.write_text("cli-token")
    command = [sys.executable, "-m", "capture_ledger.impl.cli.main", "serve", "--dir", "lineage"]
    command += ["--port", "0", "--token-file", str(token), "--ledger", "cli_targets_refuses:open_ledger"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert "capture-ledger serve: cannot open" in done.stderr
    assert "with cli_targets_refuses:open_ledger: PermissionError: no access to" in done.stderr


def test_verify_loads_a_target_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "cli_targets_here.py").write_text(
        "from capture_ledger.reference.mutants import open_reference as open_ledger\n"
    )
    command = [sys.executable, "-m", "capture_ledger.impl.cli.main", "verify", "cli_targets_here:open_ledger"]
    command += ["--profile", "ci", "--max-examples", "3"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "cli_targets_here:open_ledger (handles=1, profile=ci): conforms" in done.stdout


@pytest.mark.parametrize("option", ["--handles", "--max-examples"])
def test_verify_refuses_fewer_than_one(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", option, "0"]) == 2
    assert capsys.readouterr().err == f"capture-ledger verify: {option} must be at least 1\n"


def _imported_after(code: str) -> list[str]:
    """Which modules of the HTTP stack a fresh interpreter has loaded after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HTTP_STACK!r} if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_building_the_parser_and_spec_help_import_no_http_stack() -> None:
    code = (
        "from capture_ledger.impl.cli.main import build_parser, main\n"
        "build_parser()\n"
        "try:\n    main(['spec', '--help'])\nexcept SystemExit as stop:\n    assert stop.code == 0\n"
    )
    assert _imported_after(code) == []


def test_a_verify_run_imports_no_http_stack() -> None:
    code = (
        "from capture_ledger.impl.cli.main import main\n"
        "assert main(['verify', '--profile', 'ci', '--max-examples', '2']) == 0\n"
    )
    assert _imported_after(code) == []


def test_the_serve_command_does_import_it_when_it_runs() -> None:
    """The probe can see the stack: a ``serve`` that fails after loading it shows it imported."""
    code = (
        "import os\n"
        "os.environ['CAPTURE_LEDGER_TOKEN'] = 'cli-token'\n"
        "from capture_ledger.impl.cli.main import main\n"
        "assert main(['serve', '--dir', '.', '--workers', '0']) == 2\n"  # refused before the stack loads
        "assert main(['serve', '--dir', '/dev/null/x', '--port', '0']) == 2\n"  # refused after it loads
    )
    assert _imported_after(code) == ["fastapi", "starlette", "uvicorn"]  # httpx is the test servers'


def test_factory_options_parse_as_json_or_text_and_bind_as_keywords() -> None:
    """``--option KEY=VALUE`` of ``stress`` and ``crash --target``: JSON when it reads as JSON, else text."""
    options = parse_options(["fence_sync=file", "stripes=8", 'extra={"a": [1]}', "stripes=4", "empty="])
    assert options == {"fence_sync": "file", "stripes": 4, "extra": {"a": [1]}, "empty": ""}
    for bad in ("no-equals", "=value"):
        with pytest.raises(OptionError, match="KEY=VALUE"):
            parse_options([bad])

    def opener(workspace: Path, **kwargs: object) -> tuple[Path, dict[str, object]]:
        return workspace, kwargs

    async def async_opener(workspace: Path, **kwargs: object) -> tuple[Path, dict[str, object]]:
        return workspace, kwargs

    assert bind_options(opener, {}) is opener
    assert bind_options(opener, {"stripes": 4})(Path("w")) == (Path("w"), {"stripes": 4})
    bound = bind_options(async_opener, {"stripes": 4})
    assert asyncio.iscoroutinefunction(bound)
    assert asyncio.run(bound(Path("w"))) == (Path("w"), {"stripes": 4})


def test_a_mistyped_flag_gets_the_sub_commands_usage_and_the_closest_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["stress", "some.module:factory", "--sed", "3"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: capture-ledger stress ")  # the sub-command's usage, not the top level's
    assert err.splitlines()[-1] == (
        "capture-ledger stress: error: unrecognized arguments: --sed 3; did you mean --seed?"
    )


def test_a_mistyped_command_gets_the_closest_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["stres", "x"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("; did you mean stress?")


def test_a_flag_with_no_close_match_gets_no_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["spec", "--zzzzzz"])
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == "capture-ledger spec: error: unrecognized arguments: --zzzzzz"


def test_a_closed_standard_output_ends_quietly() -> None:
    """``capture-ledger spec | head -0``: the reader is gone before the first write, so the write fails
    (EPIPE); the command ends with exit 141 and nothing on standard error (no traceback)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "capture_ledger.impl.cli.main", "spec"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            check=False,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert completed.stderr.decode() == ""
    assert completed.returncode == CLOSED_OUTPUT_EXIT == 141


@pytest.mark.parametrize(
    ("argv", "rollouts", "duplicates"),
    [
        (["simulate"], 2_500, 500),  # a bare simulate: the source's mix at an eighth of its scale
        (["simulate", "--source"], 20_000, 4_000),  # the source's numbers, one flag away
        (["simulate", "--ci"], 240, 120),
        (["simulate", "--source", "--rollouts", "7"], 7, 4_000),  # a knob given sets it on the base
    ],
)
def test_simulate_defaults_to_a_short_run_and_the_source_scale_is_one_flag_away(
    argv: list[str], rollouts: int, duplicates: int
) -> None:
    from capture_ledger.impl.cli.main import build_parser
    from capture_ledger.impl.cli.simulate import scenario_from

    scenario = scenario_from(build_parser().parse_args(argv))
    assert (scenario.rollouts, scenario.duplicate_rollouts) == (rollouts, duplicates)
    assert (scenario.batch == 256 and scenario.calls == 4) or argv[1:] == ["--ci"]


def test_simulate_refuses_both_scales(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--source", "--ci"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
