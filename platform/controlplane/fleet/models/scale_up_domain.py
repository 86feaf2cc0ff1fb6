from django.db import models


class ScaleUpDomain(models.Model):
    """An NVLink / HCCS island (usually one host): tensor-parallel groups never cross it."""

    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.CASCADE, related_name="domains")
    name = models.SlugField(max_length=64)
    interconnect = models.CharField(max_length=32, blank=True, help_text="nvlink, hccs, pcie, ...")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="unique_domain_per_cluster")]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"
