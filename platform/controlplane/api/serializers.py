from __future__ import annotations

from django.contrib.auth import get_user_model
from rest_framework import serializers

from controlplane.api.models import ApiToken, AuditEntry
from controlplane.api.roles import ROLE_CHOICES, role_of, set_role


class UserSerializer(serializers.ModelSerializer):
    role = serializers.ChoiceField(choices=ROLE_CHOICES, required=False, allow_null=True)
    password = serializers.CharField(
        write_only=True, required=False, min_length=8, style={"input_type": "password"}
    )

    class Meta:
        model = get_user_model()
        fields = ["id", "username", "email", "is_active", "role", "password", "last_login", "date_joined"]
        read_only_fields = ["last_login", "date_joined"]

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["role"] = role_of(instance)
        return data

    def _save(self, instance, role, password):
        if password:
            instance.set_password(password)
        elif instance.password == "":
            instance.set_unusable_password()
        instance.save()
        if role:
            set_role(instance, role)
        return instance

    def create(self, validated_data):
        role = validated_data.pop("role", None)
        password = validated_data.pop("password", None)
        return self._save(get_user_model()(**validated_data), role, password)

    def update(self, instance, validated_data):
        role = validated_data.pop("role", None)
        password = validated_data.pop("password", None)
        for key, value in validated_data.items():
            setattr(instance, key, value)
        return self._save(instance, role, password)


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "at",
            "user",
            "username",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "changes",
        ]


class ApiTokenSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    key = serializers.SerializerMethodField(help_text="The bearer token: in the create response only.")

    class Meta:
        model = ApiToken
        fields = ["id", "name", "user", "username", "prefix", "created", "last_used", "revoked_at", "key"]
        read_only_fields = ["user", "prefix", "created", "last_used", "revoked_at"]

    def get_key(self, token) -> str | None:
        return getattr(token, "key", None)

    def create(self, validated_data):
        token, key = ApiToken.issue(self.context["request"].user, validated_data["name"])
        token.key = key
        return token
