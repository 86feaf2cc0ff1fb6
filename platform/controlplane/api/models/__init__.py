from controlplane.api.models.api_token import ApiToken
from controlplane.api.models.audit_entry import AuditEntry

__all__ = ["ApiToken", "AuditEntry"]
