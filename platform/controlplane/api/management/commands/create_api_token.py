from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from controlplane.api.models import ApiToken
from controlplane.api.roles import ROLES, set_role


class Command(BaseCommand):
    help = (
        "Print a new API token for USER (created if missing) with the given role; the user's older "
        "tokens are revoked."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, required=True)
        parser.add_argument("--name", default="cli", help="what the token is for (default: %(default)s)")

    def handle(self, *args, username: str, role: str, name: str, **options):
        if not username.strip():
            raise CommandError("USER must not be empty")
        with transaction.atomic():
            user, created = get_user_model().objects.get_or_create(username=username)
            if created:
                user.set_unusable_password()
                user.save()
            set_role(user, role)
            for token in ApiToken.objects.active().filter(user=user):
                token.revoke()
            _, key = ApiToken.issue(user, name)
        self.stdout.write(key)
