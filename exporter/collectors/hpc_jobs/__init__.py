"""HPC jobs as one package: the job-mapping directory's reader (source), its values (jobs), rows (section), families, and its collector."""
