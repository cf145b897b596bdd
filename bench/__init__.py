"""`python manage.py bench`: latency over real HTTP and LoCoMo retrieval quality (SPEC §10).

Everything runs against a throwaway embedded PostgreSQL (`server.throwaway_database`) and a
real uvicorn process (`server.ApiServer`); nothing touches the developer's database.
"""
