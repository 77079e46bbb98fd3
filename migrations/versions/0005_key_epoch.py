"""Key epoch: a per-profile counter bumped with every key change, so that processes caching decrypted
verification material see another process's rotation, disable, enable or destruction at once.

Revision ID: 0005
Revises: 0003
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hero_key_epochs",
        sa.Column("profile", sa.String(64), primary_key=True),
        sa.Column("epoch", sa.Integer, nullable=False),
    )
    # Profiles with keys already get their row, so a bump is always an UPDATE (no insert race).
    op.execute("INSERT INTO hero_key_epochs (profile, epoch) SELECT DISTINCT profile, 1 FROM hero_key_versions")


def downgrade() -> None:
    op.drop_table("hero_key_epochs")
