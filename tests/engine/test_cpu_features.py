from engine.cpu_features import native_bfloat16

EPYC_ZEN4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile\n"
SKYLAKE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16\n"


def test_native_bfloat16_reads_the_x86_flags():
    assert native_bfloat16(EPYC_ZEN4) and native_bfloat16(SAPPHIRE_RAPIDS)
    assert not native_bfloat16(SKYLAKE) and not native_bfloat16(ARM) and not native_bfloat16("")


def test_native_bfloat16_reads_this_hosts_cpuinfo():
    assert native_bfloat16() == native_bfloat16(open("/proc/cpuinfo").read())
