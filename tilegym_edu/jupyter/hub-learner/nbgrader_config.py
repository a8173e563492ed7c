"""nbgrader's configuration of a hub learner's server (tilegym_edu.hub puts this folder on the
learner's JUPYTER_CONFIG_PATH). nbgrader names a submission by the server's operating-system
user unless told otherwise; on a hub whose servers share one (SimpleLocalProcessSpawner, or
containers that all run as jovyan) every learner would be the same student. The hub user is the
learner."""
import os

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)
c.CourseDirectory.student_id = os.environ["JUPYTERHUB_USER"]
