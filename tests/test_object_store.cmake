# Two cases check that nothing is left in /dev/shm: not beside the bench
# smokes, whose Python baselines make entries there (mp.shared_memory,
# multiprocessing's semaphores).
set_tests_properties(test_object_store PROPERTIES RESOURCE_LOCK dev_shm)
