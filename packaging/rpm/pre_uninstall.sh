# wardcell: on erase (not upgrade: $1 is 0), unload its AppArmor profile where loaded.
profile=/etc/apparmor.d/wardcell
if [ "$1" = 0 ] \
    && [ -r /sys/kernel/security/apparmor/profiles ] \
    && grep -q '^wardcell-broker ' /sys/kernel/security/apparmor/profiles \
    && command -v apparmor_parser >/dev/null 2>&1; then
    apparmor_parser -R "$profile" || true
fi
exit 0
