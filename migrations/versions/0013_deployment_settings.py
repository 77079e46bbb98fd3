"""Deployment settings: the profile a deployment serves, recorded with its keys (`hero profile use NAME`), so the
API, the workers and every CLI command agree without HERO_PROFILE (issue 51, item 4).

A key/value table: one row per setting (`served_profile` so far). A deployment without the row keeps the rule it
had (verifier/keys/deployment.py: the profile of its keys).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hero_deployment_settings",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(255), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("hero_deployment_settings")
