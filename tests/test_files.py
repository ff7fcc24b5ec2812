"""Attribution of files a warm run wrote (pure functions over a real directory tree)."""
from pytest_compilecache import files as fs


def _kernel_dir(root, key, cubin, source="def k(): pass"):
    d = root / key
    d.mkdir(parents=True)
    (d / "k.cubin").write_bytes(cubin)
    (d / "k.source").write_text(source)
    (d / "k.json").write_text('{"hash": "%s"}' % key)
    return d


def test_identical_recompile_found_and_different_kernel_not(tmp_path):
    triton = tmp_path / "triton"
    _kernel_dir(triton, "COLDAAA", b"\x01\x02")
    _kernel_dir(triton, "COLDBBB", b"\x09")
    _kernel_dir(triton, "WARMSAME", b"\x01\x02")
    _kernel_dir(triton, "WARMDIFF", b"\x01\x03")
    new = [f"triton/{d}/{f}" for d in ("WARMSAME", "WARMDIFF") for f in ("k.cubin", "k.json")]
    assert fs.identical_triton_recompiles(triton, new) == [
        {"kernel": "k", "warm": "WARMSAME", "cold": "COLDAAA"}]


def test_no_new_triton_dirs_means_nothing_to_explain(tmp_path):
    _kernel_dir(tmp_path / "triton", "COLDAAA", b"\x01")
    assert fs.identical_triton_recompiles(tmp_path / "triton", ["inductor/fxgraph/x"]) == []
    assert fs.identical_triton_recompiles(tmp_path / "missing", ["triton/A/k.cubin"]) == []


def test_cpu_capability_probes_are_told_apart_from_kernels_by_their_source(tmp_path):
    ind = tmp_path / "inductor"
    (ind / "3g").mkdir(parents=True)
    (ind / "ab").mkdir()
    # the text torch/_inductor/cpu_vec_isa.py compiles to probe the CPU
    (ind / "3g" / "cprobe.cpp").write_text(
        'extern "C" __m512bh __avx512_bf16_chk_kernel(__m512 a, __m512 b) {}')
    (ind / "3g" / "cprobe.so").write_bytes(b"\x7fELF")
    (ind / "ab" / "ckernel.cpp").write_text('extern "C" void kernel(const float* in_ptr0) {}')
    (ind / "ab" / "ckernel.so").write_bytes(b"\x7fELF")
    new = sorted(fs.snapshot({"inductor": ind}))
    assert fs.cpu_capability_probes({"inductor": str(ind)}, new) == {
        "inductor/3g/cprobe.cpp", "inductor/3g/cprobe.so"}
    assert fs.cpu_capability_probes({}, new) == set()  # the root unknown: nothing excused
