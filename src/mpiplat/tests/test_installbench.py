"""installbench's reading of Ansible's profile_roles and profile_tasks recaps (the figures in docs/installer.md)."""

from mpiplat.installbench import profile

RECAPS = """PLAY RECAP *********************************************************************
localhost                  : ok=130  changed=40   unreachable=0    failed=0

ROLES RECAP ********************************************************************
Wednesday 25 November 2026  17:07:17 +0000 (0:00:00.123)       0:01:23.456 *****
===============================================================================
upstream_install ------------------------------------------------------- 45.23s
kueue ------------------------------------------------------------------ 10.11s
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
total ------------------------------------------------------------------ 55.34s

TASKS RECAP ********************************************************************
Wednesday 25 November 2026  17:07:17 +0000 (0:00:00.123)       0:01:23.456 *****
===============================================================================
upstream_install : Install or upgrade the Helm release: kueue 0.19.2 --- 31.20s
kueue : Wait until the ClusterQueues are Active ------------------------- 4.50s
a task whose name is longer than the terminal is wide, so that the recap pads it with no dashes at all 123.45s
"""


def test_roles_and_slowest_tasks_are_read_from_the_recaps():
    roles, tasks = profile(RECAPS, top=2)
    assert roles == [("upstream_install", 45.23), ("kueue", 10.11)]  # "total" left out
    assert tasks == [("upstream_install : Install or upgrade the Helm release: kueue 0.19.2", 31.2),
                     ("kueue : Wait until the ClusterQueues are Active", 4.5)]
    assert profile(RECAPS)[1][-1] == (
        "a task whose name is longer than the terminal is wide, so that the recap pads it with no dashes at all",
        123.45)


def test_a_run_without_the_callbacks_has_no_profile():
    assert profile("PLAY RECAP ***\nlocalhost : ok=1\n") == ([], [])
