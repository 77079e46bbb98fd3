"""Providers keyed by (issuer, sub) like every other subject (issue 52, N4/N5): the issuer whose tokens with
`sub` = provider_id are the provider. Rows registered before get issuer "", accepted only while the service
trusts a single issuer (verifier/registry/service.py); register them again with their issuer otherwise.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hero_providers") as batch:
        batch.add_column(sa.Column("issuer", sa.String(256), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("hero_providers") as batch:
        batch.drop_column("issuer")
