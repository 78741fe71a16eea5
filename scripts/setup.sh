#!/usr/bin/env bash
# Installs what the WGPU runtime needs on a machine without a GPU: Mesa's lavapipe (a Vulkan
# driver on the CPU) and the Vulkan loader. Does nothing when they are already there.
set -euo pipefail
if ! dpkg -s mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
fi
