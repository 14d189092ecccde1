"""Toolchain programs started while timed: believed only for trusted programs in trusted folders."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from solbench.worker import guard

ROOTS = tuple(os.path.realpath(d) for d in ("/usr/bin", "/bin", "/usr/lib") if os.path.isdir(d))
GCC = shutil.which("gcc")


@pytest.mark.skipif(GCC is None, reason="no gcc on this machine")
@pytest.mark.parametrize("event, args", [
    ("subprocess.Popen", ("gcc", ["gcc", "--version"], None, None)),
    ("subprocess.Popen", (None, ["gcc", "-c", "x.c"], None, None)),
    ("subprocess.Popen", (GCC, [GCC], None, None)),
    ("os.posix_spawn", (GCC, [GCC], {})),
])
def test_a_compiler_in_a_system_folder_is_trusted(event, args):
    assert guard._trusted_tool(event, args, ROOTS) == os.path.realpath(GCC)


@pytest.mark.parametrize("event, args", [
    ("subprocess.Popen", ("/bin/sh", "/bin/sh -c 'gcc'", None, None)),  # a shell
    ("subprocess.Popen", ("python3", ["python3", "-c", "work()"], None, None)),  # an interpreter
    ("os.system", ("gcc --version",)),
    ("os.fork", ()),
    ("subprocess.Popen", (None, "gcc", None, None)),  # shell=True form: no argv list
])
def test_shells_forks_and_other_programs_are_not_tools(event, args):
    assert guard._trusted_tool(event, args, ROOTS) is None


def test_a_script_the_solution_wrote_and_named_ptxas_is_not_trusted(tmp_path, monkeypatch):
    fake = tmp_path / "ptxas"
    fake.write_text("#!/bin/sh\necho forged\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert guard._trusted_tool("subprocess.Popen", (str(fake), [str(fake)], None, None), ROOTS) is None
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")  # first on the PATH too
    assert guard._trusted_tool("subprocess.Popen", ("ptxas", ["ptxas"], None, None), ROOTS) is None
    link = tmp_path / "gcc"
    link.symlink_to(fake)  # a trusted name pointing at the solution's script
    assert guard._trusted_tool("subprocess.Popen", (str(link), [str(link)], None, None), ROOTS) is None


def test_the_hook_counts_trusted_tools_and_alarms_on_the_rest(monkeypatch):
    state = guard.GuardState()
    state.protect(list(ROOTS))
    state.phase = "timing"
    hook = guard._make_hook(None, state.cell)  # called directly: nothing is installed here
    if GCC:
        hook("subprocess.Popen", ("gcc", ["gcc", "--version"], None, None))
        assert state.tools_started == 1
        assert any("toolchain program" in w and not w.startswith("alarm") for w in state.take_warnings())
    hook("subprocess.Popen", ("python3", ["python3", "-c", "1"], None, None))
    assert any(w.startswith("alarm: subprocess.Popen: started child processes while being timed")
               for w in state.take_warnings())


@pytest.mark.skipif(shutil.which("file") is None, reason="no `file` program on this machine")
def test_platform_architecture_through_file_is_trusted():
    """Triton's build key calls platform.architecture(), which runs `file -b python` (seen on the H100)."""
    found = shutil.which("file")
    assert guard._trusted_tool("subprocess.Popen", (None, ["file", "-b", "/usr/bin/python3"], None, None),
                               ROOTS) == os.path.realpath(found)


def test_the_compiler_named_by_cc_at_start_is_trusted_and_a_later_cc_is_not(tmp_path, monkeypatch):
    """The GPU image sets CC=/opt/gcc/bin/gcc; Triton builds its launchers with it. A CC the solution sets
    after the roots were read names nothing."""
    bin_dir = tmp_path / "opt-gcc" / "bin"
    bin_dir.mkdir(parents=True)
    compiler = bin_dir / "gcc"
    compiler.write_text("#!/bin/sh\nexit 0\n")
    compiler.chmod(compiler.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(compiler))
    roots = tuple(os.path.realpath(r) for r in guard.installation_roots())
    assert guard._trusted_tool("subprocess.Popen", (None, [str(compiler), "-c", "x.c"], None, None), roots) \
        == os.path.realpath(compiler)
    monkeypatch.delenv("CC")
    roots = tuple(os.path.realpath(r) for r in guard.installation_roots())
    assert guard._trusted_tool("subprocess.Popen", (None, [str(compiler)], None, None), roots) is None
