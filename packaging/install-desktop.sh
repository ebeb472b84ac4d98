#!/bin/sh
# Add Hearth to the desktop's application menu (Linux, freedesktop).
# Run it from the unpacked bundle: ./install-desktop.sh   (./install-desktop.sh --remove undoes it)
# It writes only under ~/.local/share; the bundle itself stays where it is.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
apps="${XDG_DATA_HOME:-$HOME/.local/share}/applications"
icons="${XDG_DATA_HOME:-$HOME/.local/share}/icons/hicolor/scalable/apps"
if [ "${1:-}" = "--remove" ]; then
    rm -f "$apps/hearth.desktop" "$icons/hearth.svg"
    echo "removed Hearth from the application menu"
    exit 0
fi
mkdir -p "$apps" "$icons"
cp "$here/hearth.svg" "$icons/hearth.svg"
sed -e "s|^Exec=.*|Exec=\"$here/Hearth\"|" -e "s|^TryExec=.*|TryExec=$here/Hearth|" \
    "$here/hearth.desktop" > "$apps/hearth.desktop"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database "$apps" || true
echo "Hearth is in the application menu ($apps/hearth.desktop)"
