"""Jobs: an `Idempotency-Key` per owner, so a POST /v1/jobs retried after a lost answer names the job it made
instead of making a second one; `request_sha256` tells a retry from another request reusing the key (409).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hero_jobs") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(255), nullable=True))
        batch.add_column(sa.Column("request_sha256", sa.String(64), nullable=True))
        batch.create_unique_constraint(
            "uq_hero_jobs_idempotency", ["owner_iss", "owner_sub", "role", "idempotency_key"]
        )


def downgrade() -> None:
    with op.batch_alter_table("hero_jobs") as batch:
        batch.drop_constraint("uq_hero_jobs_idempotency", type_="unique")
        batch.drop_column("request_sha256")
        batch.drop_column("idempotency_key")
