from controlplane.fleet.inventory import probe_accelerators, probe_cpu, probe_nvidia


def test_cpu_is_one_accelerator_with_the_machine_memory():
    (cpu,) = probe_cpu()
    assert cpu.vendor == "cpu" and cpu.index == 0 and cpu.memory_bytes > 2**28 and cpu.model


def test_probe_falls_back_to_cpu_without_gpus():
    # This machine has no NVIDIA driver and no npu-smi: NVML fails to initialise and we fall through.
    assert probe_nvidia() == []
    assert [a.vendor for a in probe_accelerators()] == ["cpu"]
