"""Issue 16 items 4 and 5: outputs follow the user's intent and are written whole, or not at all."""

from __future__ import annotations

import os
import time
import stat

import pytest

from layersearch.cli import main
from layersearch.common.errors import LayersearchError
from layersearch.common.jsonfile import write_json_atomic
from layersearch.masks.mask import SkipMask
from layersearch.common.outputs import check_output, write_output, write_outputs


def test_a_symlink_is_written_through(tmp_path):
    real = tmp_path / "data" / "mask.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    SkipMask(4, (1,), ()).save(link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert SkipMask.load(real).attention == (1,)


def test_dash_streams_to_stdout(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    SkipMask(4, (), (2,)).save("-")
    out = capsys.readouterr().out
    assert '"mlp": [\n    2\n  ]' in out and list(tmp_path.iterdir()) == []


def test_a_device_is_written_in_place_not_replaced():
    before = os.stat("/dev/null")
    write_json_atomic("/dev/null", {"x": 1})
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


def test_new_files_get_the_umask_mode_and_replaced_ones_keep_theirs(tmp_path):
    old = os.umask(0o027)
    try:
        fresh = tmp_path / "fresh.json"
        write_output(fresh, "{}")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o640
        kept = tmp_path / "kept.json"
        kept.write_text("x")
        kept.chmod(0o604)
        write_output(kept, "{}")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o604
    finally:
        os.umask(old)


@pytest.mark.parametrize("make, needle", [
    (lambda p: (p / "d").mkdir() or p / "d", "is a directory"),
    (lambda p: "", "is empty"),
    (lambda p: (p / "f").write_text("x") and p / "f" / "out.json", "is not a directory"),
    (lambda p: p / ("x" * 300), "file name too long"),
    (lambda p: p / "missing" / "out.json", "folder .*missing does not exist"),
    (lambda p: p / "a" / "b" / "out.json", "folder .*b does not exist"),
    (lambda p: (p / "f").write_text("x") and p / "f" / "sub" / "out.json", "is not a directory"),
    (lambda p: "/proc/out.json", "folder /proc takes no new file"),  # its permission bits say root may write
])
def test_bad_outputs_are_refused_before_work(tmp_path, make, needle):
    with pytest.raises(LayersearchError, match=needle):
        check_output(make(tmp_path))


def test_the_folder_probe_leaves_nothing(tmp_path):
    """Checking an output creates and removes one file: the folder is as it was."""
    (tmp_path / "mine.json").write_text("{}")
    check_output(tmp_path / "new.json")
    check_output(tmp_path / "mine.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.json"]


def test_no_folder_is_ever_created(tmp_path):
    """Issue 26: every command's --out alike: a missing folder is refused, never made."""
    for path in (tmp_path / "a" / "b" / "c.json", tmp_path / "missing" / "x.json"):
        with pytest.raises(LayersearchError, match="does not exist"):
            write_output(path, "{}")
    assert list(tmp_path.iterdir()) == []


def test_a_result_set_is_all_or_nothing(tmp_path, monkeypatch):
    csv, js = tmp_path / "t.csv", tmp_path / "t.json"
    csv.write_text("old csv")
    real_replace = os.replace
    calls = {"n": 0}

    def second_rename_fails(src, dst):
        calls["n"] += 1
        if str(dst) == str(js):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", second_rename_fails)
    with pytest.raises(LayersearchError, match="nothing was written"):
        write_outputs([(csv, "new csv"), (js, "[]")])
    monkeypatch.setattr(os, "replace", real_replace)
    assert csv.read_text() == "old csv" and not js.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]  # no temporary or backup left


def test_compare_writes_both_tables_or_neither(tmp_path):
    from layersearch.study.compare import write_table

    (tmp_path / "t.json").mkdir()  # the JSON cannot be written: the CSV must not appear either
    with pytest.raises(LayersearchError, match="is a directory"):
        write_table([{"name": "a"}], tmp_path / "t", ["name"])
    assert not (tmp_path / "t.csv").exists()


def test_profile_checks_out_before_loading_the_model(tmp_path, monkeypatch, capsys):
    import layersearch.commands.profile as profile_command

    monkeypatch.setattr(profile_command, "load", lambda args: pytest.fail("the model was loaded before --out was checked"))
    (tmp_path / "out").mkdir()
    status = main(["profile", "--out", str(tmp_path / "out")])
    assert status == 2 and "is a directory" in capsys.readouterr().err


# ----- outputs never block on a FIFO, never replace an input, get the umask's modes -------------
def test_a_fifo_nobody_reads_is_refused_at_once(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    with pytest.raises(LayersearchError, match="FIFO .* no process reads"):
        check_output(fifo)


def test_a_fifo_with_a_reader_gets_the_data_in_one_stream(tmp_path):
    import threading

    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))  # blocks until a writer opens
    reader.start()
    for _ in range(1000):  # the reader's open must be in place before ours, or the check refuses
        target = None
        try:
            target = check_output(fifo)
            break
        except LayersearchError:
            time.sleep(0.01)
    assert target is not None and target.stream
    write_output(target, b"data")
    reader.join()
    assert got == [b"data"]


def test_an_output_onto_an_input_or_another_output_is_refused(tmp_path, monkeypatch):
    from layersearch.common.outputs import check_distinct

    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.jsonl").write_text("mine")
    os.symlink("p.jsonl", tmp_path / "link.jsonl")
    os.link(tmp_path / "p.jsonl", tmp_path / "hard.jsonl")
    for out in ("p.jsonl", "./p.jsonl", "link.jsonl", "hard.jsonl", str(tmp_path / "p.jsonl")):
        with pytest.raises(LayersearchError, match="would destroy that input"):
            check_distinct([("--out", out)], [("--prompts", "p.jsonl")])
    with pytest.raises(LayersearchError, match="are the same file"):
        check_distinct([("--out", "new.md"), ("--report", "./new.md")])
    check_distinct([("--out", "-"), ("--report", "-"), ("--plot", os.devnull)], [("--prompts", os.devnull)])  # streams
    check_distinct([("--out", "other.json")], [("--prompts", "p.jsonl")])
    assert (tmp_path / "p.jsonl").read_text() == "mine"


def test_umask_modes_give_what_mkdir_and_open_would(tmp_path):
    from layersearch.common.outputs import umask_modes

    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True, mode=0o700)
    (folder / "model.safetensors").write_bytes(b"x")
    (folder / "model.safetensors").chmod(0o600)
    old = os.umask(0o027)
    try:
        umask_modes(folder)
        assert stat.S_IMODE(folder.stat().st_mode) == 0o750 and stat.S_IMODE((folder / "sub").stat().st_mode) == 0o750
        assert stat.S_IMODE((folder / "model.safetensors").stat().st_mode) == 0o640
        umask_modes(folder, 0o700)  # an existing empty --out folder keeps its own mode
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        os.umask(old)


def test_generate_refuses_save_spec_onto_its_prompt_file_before_loading(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi"}\n')
    monkeypatch.setattr("layersearch.commands.common.load", lambda args: pytest.fail("the model was loaded"))
    assert main(["generate", "--prompts", "p.jsonl", "--save-spec", "p.jsonl"]) == 2
    assert "--save-spec p.jsonl is the --prompts input" in capsys.readouterr().err
    assert (tmp_path / "p.jsonl").read_text() == '{"prompt": "hi"}\n'


