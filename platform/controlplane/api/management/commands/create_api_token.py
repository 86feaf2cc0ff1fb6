from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rest_framework.authtoken.models import Token

from controlplane.api.roles import ROLES, set_role


class Command(BaseCommand):
    help = "Print a new API token for USER (created if missing) with the given role; the old token stops working."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, required=True)

    def handle(self, *args, username: str, role: str, **options):
        if not username.strip():
            raise CommandError("USER must not be empty")
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
            user.save()
        set_role(user, role)
        Token.objects.filter(user=user).delete()
        self.stdout.write(Token.objects.create(user=user).key)
