"""verifiers environments written as a user writes them (a module with `load_environment`), for
`env.id=verifiers:tests.verifiers_envs.<module>`."""
