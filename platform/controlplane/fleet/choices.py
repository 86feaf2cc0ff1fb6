from django.db import models


class NodeState(models.TextChoices):
    UP = "up", "up"
    LOST = "lost", "lost"
    CORDONED = "cordoned", "cordoned"


# from -> states it may move to
NODE_TRANSITIONS: dict[str, set[str]] = {
    NodeState.UP: {NodeState.LOST, NodeState.CORDONED},
    NodeState.LOST: {NodeState.UP, NodeState.CORDONED},
    NodeState.CORDONED: {NodeState.UP, NodeState.LOST},
}
SCHEDULABLE_NODE_STATES = (NodeState.UP,)
WATCHED_NODE_STATES = (NodeState.UP, NodeState.CORDONED)  # heartbeats expected


class Vendor(models.TextChoices):
    NVIDIA = "nvidia", "NVIDIA"
    ASCEND = "ascend", "Ascend"
    CPU = "cpu", "CPU"


# Environment variable that restricts an engine process to the accelerators it was given.
VISIBLE_DEVICES_ENV = {
    Vendor.NVIDIA: "CUDA_VISIBLE_DEVICES",
    Vendor.ASCEND: "ASCEND_RT_VISIBLE_DEVICES",
}
# Engine --device for each vendor.
ENGINE_DEVICE = {Vendor.NVIDIA: "cuda", Vendor.ASCEND: "npu", Vendor.CPU: "cpu"}
# Placement's words for a node whose agent cannot drive a vendor's devices: "node n1 has 8 <noun> but <missing>".
ACCELERATOR_NOUN = {Vendor.NVIDIA: "NVIDIA GPUs", Vendor.ASCEND: "Ascend NPUs", Vendor.CPU: "CPUs"}
MISSING_RUNTIME = {
    Vendor.NVIDIA: "no CUDA runtime (torch there sees no CUDA device; check the driver and torch build)",
    Vendor.ASCEND: "no torch_npu runtime (install chassis[ascend] there, then restart its agent)",
}
# CPU "accelerators" are shared by every replica on the node; GPUs/NPUs are held exclusively.
SHARED_VENDORS = (Vendor.CPU,)


class AcceleratorHealth(models.TextChoices):
    OK = "ok", "ok"
    DEGRADED = "degraded", "degraded"
    UNAVAILABLE = "unavailable", "unavailable"
