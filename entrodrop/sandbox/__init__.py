"""The sandbox of model-written code: the evaluation's side (``code_runner``: jobs, deadlines,
LiveCodeBench's comparisons), the trusted harness that holds a benchmark's tests and runs them
(``code_harness``, its process's entry, with its parts: ``pipes``, reads and writes by deadlines;
``scratch``, where the candidate may write; ``candidates``, starting a candidate and checking its
replies; ``assertion_tests``, HumanEval's and MBPP's tests against remote calls), the time limits
the two keep alike (``deadlines``), and the candidate process, the only place model-written code
runs, reached by remote calls (``sandbox_child``: one file, standard library only, the one file
of the project bubblewrap binds into the sandbox)."""
