"""Reference kernels of finished lessons: the baselines later lessons measure against, and what
the comparison at the end of a lesson shows next to yours. Each is the worked solution of its
lesson, word for word (a test keeps the notebook and this package in step), and each raises
LibraryShortcut if called inside a graded call.
"""
