"""Key-time pins: each key version records the tokenizer fingerprint and the profile digest it was made with
(issue 54, item 4), so decoding refuses a tokenizer other than the keys' in one line naming both fingerprints,
whichever command made the keys (`hero keys init`, `POST /v1/keys/init`, a rotation).

Versions made before this revision keep NULL in both columns: nothing is known of their tokenizer, so they check
nothing (a profile file's own `tokenizer_fingerprint` still does).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hero_key_versions") as batch:
        batch.add_column(sa.Column("tokenizer_fingerprint", sa.String(64), nullable=True))
        batch.add_column(sa.Column("profile_digest", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hero_key_versions") as batch:
        batch.drop_column("profile_digest")
        batch.drop_column("tokenizer_fingerprint")
