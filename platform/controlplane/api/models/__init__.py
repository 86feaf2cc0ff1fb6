from controlplane.api.models.audit_entry import AuditEntry

__all__ = ["AuditEntry"]
