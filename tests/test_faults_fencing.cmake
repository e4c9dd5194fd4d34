# SPDX-License-Identifier: BSL-1.0
# Included by tests/CMakeLists.txt after test_faults_fencing is defined. The
# cases need the three-host Slurm rig (slurm-up.sh --nodes 3 --netns) and
# root; they cut links with iptables rules commented "fiber-fencing", which
# the cleanup fixture removes from the rig's namespaces however the test
# ended (the test's own guard removes them first).
add_test(NAME ${name}_iptables_cleanup
         COMMAND sh -c "for n in righost1 righost2 righost3; do ip netns exec $n iptables -w -S 2>/dev/null | grep fiber-fencing | sed 's/^-A /-D /' | while read -r r; do ip netns exec $n iptables -w $r; done; done; true")
set_tests_properties(${name}_iptables_cleanup PROPERTIES FIXTURES_CLEANUP fencing_iptables LABELS faults)
set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED fencing_iptables RESOURCE_LOCK slurm_rig TIMEOUT 180)
