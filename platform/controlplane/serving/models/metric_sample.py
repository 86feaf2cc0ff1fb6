from django.db import models


class MetricSample(models.Model):
    """One scrape of a ready replica's /metrics: cumulative counters plus rates since the last scrape."""

    replica = models.ForeignKey("serving.Replica", on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField(db_index=True)
    # cumulative, as the engine reports them
    generation_tokens_total = models.FloatField(default=0)
    prompt_tokens_total = models.FloatField(default=0)
    prefix_cache_queries_total = models.FloatField(default=0)
    prefix_cache_hits_total = models.FloatField(default=0)
    spec_decode_drafts_total = models.FloatField(default=0, help_text="Speculative decoding: drafts verified.")
    spec_decode_draft_tokens_total = models.FloatField(
        default=0, help_text="Speculative decoding: draft tokens verified."
    )
    spec_decode_accepted_tokens_total = models.FloatField(
        default=0, help_text="Speculative decoding: draft tokens accepted."
    )
    ttft_buckets = models.JSONField(
        default=dict, help_text="Cumulative TTFT histogram: upper bound -> count."
    )
    kv_tiers = models.JSONField(
        default=dict,
        help_text="Per KV tier below the device pool: tier -> cumulative hit_tokens, onload_bytes and "
        "onload_seconds, and the bytes_held at the scrape.",
    )
    busy_seconds = models.JSONField(
        default=dict,
        help_text="Cumulative step time per kind of work (prefill, decode), each step shared among its rows.",
    )
    # instantaneous
    requests_running = models.FloatField(default=0)
    kv_cache_usage = models.FloatField(default=0)
    accelerators = models.FloatField(
        default=0, help_text="Accelerators the replica holds (0: it does not say, as before it was scraped)."
    )
    accelerator_hour_price = models.FloatField(
        default=0,
        help_text="Price per accelerator-hour the operator set (accelerator_hour_price); 0: not set.",
    )
    # derived from the difference with the previous sample (null when there is none, or nothing happened)
    ttft_p50_s = models.FloatField(null=True, blank=True)
    tokens_per_s = models.FloatField(null=True, blank=True)
    prefix_cache_hit_rate = models.FloatField(null=True, blank=True)
    spec_acceptance_rate = models.FloatField(
        null=True, blank=True, help_text="Accepted over verified draft tokens (null: none verified)."
    )
    spec_mean_accepted_length = models.FloatField(
        null=True, blank=True, help_text="Tokens a speculating request emitted per step: 1 + accepted per draft."
    )

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["replica", "at"])]
