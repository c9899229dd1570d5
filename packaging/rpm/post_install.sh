# wardcell: load its AppArmor profile where AppArmor 4 is enabled (openSUSE and
# others); never fails the installation (`wardcell doctor` says what to do).
profile=/etc/apparmor.d/wardcell
if [ -d /sys/kernel/security/apparmor ] \
    && [ -e /etc/apparmor.d/abi/4.0 ] \
    && command -v apparmor_parser >/dev/null 2>&1; then
    apparmor_parser -r -T -W "$profile" \
        || echo "wardcell: could not load the AppArmor profile $profile; load it with: sudo apparmor_parser -r $profile" >&2
fi
exit 0
