# Versions of the optional test dependencies the scripts install (sourced by scripts/test.sh and
# scripts/test_wheel.sh, so that a checkout run and an installed-wheel run test against the same ones).
TORCH_PIN="torch==2.13.0"  # CPU torch: the tests that pass torch tensors skip, saying so, without it
