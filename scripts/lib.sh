# Shared by the ensure-*.sh scripts: logging to stderr and installing Debian packages on demand.
say() { echo "$(basename "$0" .sh): $*" >&2; }
SUDO=""
AS_POSTGRES="runuser -u postgres --"
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; AS_POSTGRES="sudo -u postgres"; fi

apt_updated=0
need_pkg() {
  local pkg=$1
  if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then return; fi
  if [ $apt_updated -eq 0 ]; then
    say "apt-get update"
    $SUDO apt-get update -q >/dev/null
    apt_updated=1
  fi
  say "installing Debian package $pkg"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "$pkg" >/dev/null
}
