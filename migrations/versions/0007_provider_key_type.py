"""Providers: the key type bundles are sealed with (hero-bundle-2, RFC 9180 HPKE): `x25519` (every provider
registered before) or the hybrid `mlkem768-x25519`, whose public key is 1216 bytes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hero_providers") as batch:
        batch.add_column(sa.Column("key_type", sa.String(32), nullable=False, server_default="x25519"))
        batch.alter_column("public_key", type_=sa.LargeBinary(2048), existing_type=sa.LargeBinary(32),
                           existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("hero_providers") as batch:
        batch.drop_column("key_type")
        batch.alter_column("public_key", type_=sa.LargeBinary(32), existing_type=sa.LargeBinary(2048),
                           existing_nullable=False)
