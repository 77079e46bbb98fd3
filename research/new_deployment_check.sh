#!/usr/bin/env bash
# What a new deployment meets (issue 51's check): a fresh HERO_HOME set up the way scripts/dev sets one up
# (`hero keys init --models 37,41`: the new-deployment profile, spec v5), 16 chat requests written for this check
# (not from the evaluation's prompt set), answered by `hero generate --chat` at top-k 50 / top-p 0.9 and cut to 50
# tokens, then decoded as a moderator would (`hero decode --levels 1`, model-free). Prints one JSON line per answer
# and a summary: detected (p <= 1e-3) and exact model.
#   research/new_deployment_check.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
export HERO_HOME="$OUT/home" HERO_DEV_MODE=1 OMP_NUM_THREADS=1
unset HERO_PROFILE HERO_PROFILES_DIR HERO_URL HERO_TOKEN
hero db upgrade >/dev/null
hero keys init --models 37,41 >/dev/null
python - "$OUT/requests.jsonl" <<'EOF'
import json, sys
prompts = [
    "What should I pack for a three-day hiking trip in the mountains?",
    "Explain how a bill becomes a law in simple terms.",
    "My tomato plants have yellow leaves. What could be wrong?",
    "Write a short note thanking a colleague for covering my shift.",
    "How do I start learning to play the guitar as an adult?",
    "What are some cheap ways to keep a house warm in winter?",
    "Give me three ideas for a rainy-day activity with kids.",
    "Why is the sky blue? Keep it short.",
    "How can I prepare for a job interview at a bakery?",
    "Suggest a simple weekly workout plan for a beginner.",
    "What is the difference between weather and climate?",
    "How do I politely decline an invitation to a party?",
    "Tips for studying for a history exam in two days?",
    "What should I know before adopting a cat?",
    "Describe how to make a basic vegetable soup.",
    "How can I save money on groceries each month?",
]
with open(sys.argv[1], "w") as f:
    for i, p in enumerate(prompts):
        f.write(json.dumps({"prompt": p, "fields": {"model": 37 if i % 2 else 41, "user": 100 + i}}) + "\n")
EOF
hero generate --input "$OUT/requests.jsonl" --chat --top-k 50 --top-p 0.9 --max-new-tokens 50 --min-new-tokens 50 \
  > "$OUT/answers.jsonl"
python - "$OUT/answers.jsonl" "$OUT/requests.jsonl" <<'EOF'
import json, subprocess, sys
answers = [json.loads(x) for x in open(sys.argv[1])]
asked = [json.loads(x) for x in open(sys.argv[2])]
det = exact = 0
for a, q in zip(answers, asked, strict=True):
    out = subprocess.run(["hero", "decode", "--levels", "1", "--text", a["text"]], capture_output=True, text=True,
                         check=True)
    r = json.loads(out.stdout)
    lv = r["levels"][0]
    d = lv["p_value"] <= 1e-3
    e = lv["fields"] == {"model": q["fields"]["model"]}
    det += d
    exact += e
    print(json.dumps({"model": q["fields"]["model"], "tokens": a.get("tokens"), "p_value": lv["p_value"],
                      "status": lv["status"], "fields": lv["fields"], "profile": r.get("profile")}))
print(json.dumps({"answers": len(answers), "detected_p_le_1e-3": det, "exact_model": exact}))
EOF
