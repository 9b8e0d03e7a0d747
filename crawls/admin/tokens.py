"""The admin of API tokens: the secret is shown once; revoking is an action."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied

from crawls.admin.words import PlainTitles
from crawls.lease import db_now
from crawls.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(PlainTitles, admin.ModelAdmin):
    """API tokens: the secret is shown once, in the message after adding; revoke is an action."""

    list_display = ("prefix", "name", "user", "org", "read_only", "rate_limit", "last_used_at", "revoked_at")
    list_filter = ("read_only", "org")
    list_select_related = ("user", "org")
    actions = ["revoke_tokens"]

    def get_queryset(self, request):
        """Superusers see every token; anyone else only their own."""
        tokens = super().get_queryset(request)
        return tokens if request.user.is_superuser else tokens.filter(user=request.user)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        # A token carries its user's permissions: only a superuser (who has them all
        # already) may make one for someone else. The narrowed choices also refuse a
        # forged POST naming another user ("Select a valid choice").
        if db_field.name == "user" and not request.user.is_superuser:
            kwargs["queryset"] = User.objects.filter(pk=request.user.pk)
            kwargs["initial"] = request.user.pk
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_fields(self, request, obj=None):
        editable = ["user", "name", "org", "read_only", "rate_limit"]
        return editable if obj is None else [*editable, "prefix", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("user", "prefix", "created_at", "last_used_at", "revoked_at")

    def save_model(self, request, obj, form, change):
        if not change and obj.user_id != request.user.pk and not request.user.is_superuser:
            raise PermissionDenied("only a superuser creates tokens for other users")
        secret = None if change else obj.new_secret()
        super().save_model(request, obj, form, change)
        if secret:
            messages.warning(request, f"Token {obj.prefix}: {secret} (copy it now; it is not shown again)")

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke_tokens(self, request, queryset):
        revoked = queryset.filter(revoked_at__isnull=True).update(revoked_at=db_now())
        messages.info(request, f"revoked {revoked} token(s)")
