export PYTHONUNBUFFERED=1; python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1|tail -2; export PYTHONPATH=$PWD:/tmp/site
echo "== pytest -m gpu (anti-cheat suite cases run separately)"
timeout -s INT 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests -k "not test_gpu_case" --tb=short 2>&1 | grep -E "^(FAILED|ERROR|E  |[0-9]+ (passed|failed))|passed|seen" | head -30
bash benchmarks/gpu_gate.sh 3
