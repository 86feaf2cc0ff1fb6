from django.db import models

from controlplane.fleet.choices import AcceleratorHealth, Vendor


class Accelerator(models.Model):
    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, related_name="accelerators")
    vendor = models.CharField(max_length=16, choices=Vendor.choices)
    model = models.CharField(max_length=120, blank=True)
    index = models.PositiveSmallIntegerField(help_text="Device index on its node, as the runtime numbers it.")
    memory_bytes = models.BigIntegerField(default=0)
    health = models.CharField(max_length=16, choices=AcceleratorHealth.choices, default=AcceleratorHealth.OK)
    last_seen = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node__name", "vendor", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "vendor", "index"], name="unique_accelerator_per_node")
        ]

    def __str__(self) -> str:
        return f"{self.node.name}:{self.vendor}{self.index}"
