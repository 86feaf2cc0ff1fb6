from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password

from controlplane.api.roles import ROLE_CHOICES


class UserCreateForm(forms.ModelForm):
    password = forms.CharField(widget=forms.PasswordInput, min_length=8)
    role = forms.ChoiceField(choices=ROLE_CHOICES)

    class Meta:
        model = get_user_model()
        fields = ["username", "email"]

    def clean_password(self):
        password = self.cleaned_data["password"]
        validate_password(password)
        return password


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What it is for, such as the script that uses it.")


class UserEditForm(forms.ModelForm):
    role = forms.ChoiceField(choices=ROLE_CHOICES)
    password = forms.CharField(
        widget=forms.PasswordInput,
        required=False,
        min_length=8,
        help_text="Leave empty to keep the password.",
    )

    class Meta:
        model = get_user_model()
        fields = ["email", "is_active"]

    def clean_password(self):
        password = self.cleaned_data["password"]
        if password:
            validate_password(password, self.instance)
        return password
