#!/usr/bin/env bash
# checkov on template.yaml and operations.yaml, its nested application (CloudFormation framework): exits
# non-zero if any check fails.
#
# Every finding is either fixed in the template or skipped with the reason written next to it: a check
# skipped for a reason every Lambda function or every log group shares is in scripts/checkov.yaml
# (checkov's configuration, skip-check:, each check under its reason); one resource's own skip is in its
# Metadata (Metadata: checkov: skip: - id: CKV_AWS_... comment: "..."). tests/static/test_checkov_skips.py
# checks that each skip says why and whom it covers. Extra arguments go to checkov.
#
# checkov pins its own boto3/botocore (older than the project's boto3>=1.40), so it lives in its own
# venv, .venv-checkov, installed once and stamped with its version. Offline apart from that install:
# --skip-download and CKV_SKIP_PACKAGE_UPDATE_CHECK keep it from calling Prisma Cloud or PyPI.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHECKOV_VERSION="3.3.30"
VENV="${ROOT}/.venv-checkov"
STAMP="${VENV}/.installed-${CHECKOV_VERSION}"
PYTHON="${PYTHON:-python3}"

if [[ ! -f "${STAMP}" ]]; then
  echo "Installing checkov ${CHECKOV_VERSION} into ${VENV#"${ROOT}/"}" >&2
  rm -rf "${VENV}"
  "${PYTHON}" -m venv "${VENV}"
  "${VENV}/bin/python" -m pip install --quiet --upgrade pip
  "${VENV}/bin/python" -m pip install --quiet "checkov==${CHECKOV_VERSION}"
  touch "${STAMP}"
fi

cd "${ROOT}"
export CKV_SKIP_PACKAGE_UPDATE_CHECK=true
exec "${VENV}/bin/checkov" --config-file scripts/checkov.yaml --framework cloudformation --file template.yaml --file operations.yaml --compact --quiet --skip-download "$@"
