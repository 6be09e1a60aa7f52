#!/usr/bin/env bash
# Install LiteLLM's proxy into its own cached venv ($CACHE/litellm/<version>), once: a real
# OpenAI-compatible gateway that tests put in front of `gdpval fake-model`. Kept out of the project's
# venv (its dependency tree is large and pins its own openai). Prints the venv's bin folder.
# Usage: hack/litellm.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LITELLM_DIR="$CACHE/litellm/$LITELLM_VERSION"

install_litellm() {
  if [[ -f "$LITELLM_DIR/.installed" ]]; then
    log "litellm $LITELLM_VERSION: cached in $LITELLM_DIR"
    return 0
  fi
  log "litellm $LITELLM_VERSION: installing into $LITELLM_DIR"
  # Scripts in a venv name its folder, so it is built in place; the stamp marks a finished install.
  rm -rf "$LITELLM_DIR"
  "${PYTHON:-python3}" -m venv "$LITELLM_DIR"
  nice -n 15 "$LITELLM_DIR/bin/pip" install -q --disable-pip-version-check "litellm[proxy]==$LITELLM_VERSION"
  touch "$LITELLM_DIR/.installed"
  log "litellm $LITELLM_VERSION: installed"
}

with_lock litellm install_litellm
echo "$LITELLM_DIR/bin"
