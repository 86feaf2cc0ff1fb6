"""The npu-smi parser on output in the format npu-smi 23.x/24.x prints on 910B hosts.

No Ascend hardware exists here: this text stands in for the tool (a mock, said plainly); the layout
follows published `npu-smi info` transcripts, including the "59356/ 65536" spacing quirk.
"""

import stat

from controlplane.fleet.inventory import probe_ascend
from controlplane.fleet.npu_smi import parse_npu_smi_info

NPU_SMI_INFO = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc1                 Version: 24.1.rc1                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B2C              | OK            | 86.8        35                0    / 0             |
| 0                         | 0000:66:00.0  | 0           0    / 0          59356/ 65536         |
+===========================+===============+====================================================+
| 1     910B2C              | Warning       | 103.1       37                0    / 0             |
| 0                         | 0000:19:00.0  | 0           0    / 0          3378 / 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 0       0                 | 1712733       | python                   | 56000                   |
+===========================+===============+====================================================+
"""


def test_parses_devices_and_ignores_process_table():
    devices = parse_npu_smi_info(NPU_SMI_INFO)
    assert [(d.npu_id, d.chip_id, d.name, d.health) for d in devices] == [
        (0, 0, "910B2C", "OK"),
        (1, 0, "910B2C", "Warning"),
    ]
    assert [(d.hbm_used_mb, d.hbm_total_mb) for d in devices] == [(59356, 65536), (3378, 65536)]


def test_garbage_gives_no_devices():
    assert parse_npu_smi_info("npu-smi: command failed\n| broken |") == []


def test_probe_ascend_runs_the_tool(tmp_path):
    fake = tmp_path / "npu-smi"  # a stand-in executable printing the sample above
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = info ] || exit 1\ncat <<'EOF'\n{NPU_SMI_INFO}EOF\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    found = probe_ascend(str(fake))
    assert [(a.vendor, a.index, a.memory_bytes, a.health) for a in found] == [
        ("ascend", 0, 65536 * 2**20, "ok"),
        ("ascend", 1, 65536 * 2**20, "degraded"),
    ]
